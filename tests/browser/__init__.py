"""The real app in a real browser: streamlit run, Chromium driven by Playwright, one server per file.

Uses Debian's chromium (Playwright cannot download its own browser on these machines). Without it the tests are
skipped with instructions, except under CI (CI=true), where they must run. A file is one xdist work unit
(`--dist loadfile`), so the files run side by side (tests/conftest.py's LONGEST_FIRST collects them first).
"""
