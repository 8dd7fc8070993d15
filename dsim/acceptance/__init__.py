"""dsim.acceptance"""
