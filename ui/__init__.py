"""Streamlit glue shared by the pages: cached calls into moe_model, the sidebar, URL state, errors."""
