"""Crosscheck reviewer console (Streamlit)."""
