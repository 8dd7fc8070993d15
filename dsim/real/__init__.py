"""dsim.real"""
