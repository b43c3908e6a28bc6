"""MoE Cache Explorer: what llama.cpp's --moe-cache-mib does for a model and a GPU.

streamlit run app.py
"""

import streamlit as st

from ui.background import on_page
from ui.startup import app_runs, prepare_process

# a local icon: a Material one is fetched from fonts.gstatic.com, and the app must work offline
st.set_page_config(page_title="MoE Cache Explorer", page_icon="ui/icon.png", layout="wide")

PAGES = [
    st.Page("pages/model_budget.py", title="Model & budget", icon=":material/calculate:", default=True),
    st.Page("pages/explore.py", title="Explore", icon=":material/insights:"),
    st.Page("pages/reference.py", title="Reference", icon=":material/table_chart:"),
    st.Page("pages/logs.py", title="Logs", icon=":material/description:"),
    st.Page("pages/learn.py", title="Learn", icon=":material/school:"),
    st.Page("pages/shopping.py", title="Hardware shopping", icon=":material/shopping_cart:"),
]

st.sidebar.title("MoE Cache Explorer")
st.sidebar.caption("This app computes what llama.cpp's MoE expert cache (b11480+) does before you start a server.")
prepare_process()  # once: kernels (a fresh install compiles in a subprocess), imports, then gc.freeze()
app_runs()
page = st.navigation(PAGES)
on_page(page.url_path)  # the work of the page this session left is stopped (ui.background)
page.run()
