"""dsim.models"""
