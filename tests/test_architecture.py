"""The tree shows the architecture: each folder of moe_model imports only the layers before it, never Streamlit."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "moe_model"

# Bottom to top: a module may import its own layer and the layers before it, never one after it.
LAYERS = [
    {
        "atomic",
        "errors",
        "limits",
        "numba_cache",
        "fitting",
        "progress",
        "resources",
        "settings",
        "stored",
        "threads",
        "workload",
    },
    {"readers"},
    {"llama"},
    {"record"},
    {"policies"},
    {"routing"},
    {"speed"},
    {"pricing"},
    {"fits"},
    {"answers"},
    {"charts", "charts_range", "warmup", "fuzzing"},
    {"cli", "__main__", "__init__"},
]


def _layer(part: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if part in names)


def _unit(path: Path) -> str:
    """The folder (or top-level module) a file belongs to."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """moe_model modules a file imports, as the unit they belong to (first part after moe_model)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moe_model"):
            parts = node.module.split(".")
            found.add(parts[1] if len(parts) > 1 else node.names[0].name)
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("moe_model.")}
    return found


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.relative_to(PACKAGE).parts)


def test_every_folder_and_top_level_module_has_a_layer():
    assert {_unit(p) for p in SOURCES} <= set().union(*LAYERS)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_layer_above_its_own(path):
    unit = _unit(path)
    upward = {i for i in _imports(path) if _layer(i) > _layer(unit)}
    assert not upward, f"{path.relative_to(PACKAGE)} ({unit}) imports {sorted(upward)} from a later layer"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_library_never_imports_streamlit(path):
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(name.split(".")[0] == "streamlit" for name in names)


def test_a_deliberate_upward_import_is_caught(tmp_path):
    """Positive control: the checker sees an import of speed/ from readers/."""
    fake = PACKAGE / "readers" / "gguf.py"
    source = fake.read_text() + "\nfrom moe_model.speed.time_model import TimeParams\n"
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    assert "speed" in _imports(probe) and _layer("speed") > _layer("readers")


def test_the_design_cards_top_level_names_exist():
    root = PACKAGE.parent
    card = ["requirements.txt", "README.md", "app.py", "pages", "moe_model", "sample_data", "tests"]
    assert [name for name in card if not (root / name).exists()] == []


ROOT = PACKAGE.parent
OUTSIDE = re.compile(r"\.\./shared|/work/")  # the sibling checkout's shared folder, this machine's work tree
CACHE_DOC = "docs/llamacpp-cache.md"


def _repo_python_files() -> list[Path]:
    """Every .py file of the repository, without caches, virtual environments and build outputs."""
    skip = {"build", "dist", "__pycache__"}
    return [
        p
        for p in ROOT.rglob("*.py")
        if not any(
            part.startswith(".") or part in skip or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts
        )
    ]


def _outside_citations(path: Path) -> list[str]:
    return [f"{path.name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]


def test_no_python_file_cites_a_path_outside_the_repository():
    this = Path(__file__).resolve()
    assert [hit for p in _repo_python_files() if p.resolve() != this for hit in _outside_citations(p)] == []


def test_the_outside_path_check_sees_a_citation_of_the_shared_folder(tmp_path):
    """Positive control: a comment citing the shared docs folder is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("x = 1  # see ../" + "shared/docs/llamacpp-moe-cache.md section 5\n")
    assert _outside_citations(probe) == ["probe.py:1"]


def test_every_section_the_code_cites_of_the_cache_doc_exists():
    sections = {int(m) for m in re.findall(r"^## (\d+)\.", (ROOT / CACHE_DOC).read_text(), flags=re.M)}
    cited = re.compile(re.escape(CACHE_DOC) + r" sections? (\d+)(?: and (\d+))?")
    found = {int(n) for p in _repo_python_files() for m in cited.findall(p.read_text()) for n in m if n}
    assert found and found <= sections, sorted(found - sections)


TESTS_OWN = {"browser", "fuzz_corpus", "__pycache__"}  # the real-browser stories, the fuzzers' crash corpus


def test_the_tests_mirror_the_tree_and_name_each_file_once():
    """tests/<package>/ for each moe_model package (tests/ui/ for ui/, tests/app/ for app.py and pages/), top-level
    modules' tests at the top; basenames unique, as pytest's rootdir-relative imports need."""
    tests = ROOT / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir()} - TESTS_OWN
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | {"ui", "app"}
    assert folders and folders <= packages, sorted(folders - packages)
    names = [p.name for p in tests.rglob("test_*.py") if "browser" not in p.parts]
    assert len(names) == len(set(names)), sorted(n for n in set(names) if names.count(n) > 1)


MAX_PARAMETERS = 8  # issue 37: a request travels as one record (Scenario, RangeInputs), not as loose values
NARROW = [ROOT / "ui", PACKAGE / "answers"]


def _wide_functions(path: Path) -> list[str]:
    """Functions of `path` that take more than MAX_PARAMETERS parameters (self, *args and **kwargs counted)."""
    wide = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
            wide += [f"{path.name}:{node.name} ({n})"] if n > MAX_PARAMETERS else []
    return wide


@pytest.mark.parametrize("path", sorted(p for d in NARROW for p in d.rglob("*.py")), ids=lambda p: p.name)
def test_no_function_of_ui_or_answers_takes_more_than_eight_parameters(path):
    assert _wide_functions(path) == []


def test_the_parameter_check_sees_a_wide_function(tmp_path):
    """Positive control: nine parameters, counting keyword-only ones and **kwargs, are caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f(a, b, c, d, e, f, g, *, h, **rest):\n    return a\n")
    assert _wide_functions(probe) == ["probe.py:f (9)"]


def _imports_predict(path: Path) -> bool:
    """Whether a module imports the time model's predict (the call that prices one setting)."""
    nodes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)]
    return any(n.module == "moe_model.speed.time_model" and "predict" in {a.name for a in n.names} for n in nodes)


def test_one_pricing_route_only_the_curve_pipeline_calls_the_time_models_predict():
    """Pages, commands and the calibration price through pricing/curve.py (issue 37: the calibration had a second
    route); scripts/ too."""
    sources = [*SOURCES, *sorted((ROOT / "scripts").glob("*.py")), *sorted((ROOT / "ui").glob("*.py"))]
    callers = [str(p.relative_to(ROOT)) for p in sources if _imports_predict(p)]
    assert callers == ["moe_model/pricing/curve.py"]
