"""dsim.pareto"""
