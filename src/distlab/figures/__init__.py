"""Figures and tables of each experiment, drawn only from its summary tables."""
