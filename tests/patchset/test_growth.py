"""growth: a new file's definitions arrive with the first commit that uses them."""

import textwrap

import pytest
from conftest import git_as_caller, new_repository
from patchset import growth

UPSTREAM = "py/pkg/upstream.py"
NEW = "py/pkg/_new.py"
TEST = "tests/py/test_new.py"

NEW_MODULE = '''\
"""A new module; its docstring names ``later_helper``, which does not use it."""

import json
import os

from pkg.registry import register

LIMIT = 3


def first_helper(x):
    return min(x, LIMIT)


def later_helper(path):
    return os.path.basename(path) + json.dumps(first_helper(1))


@register("op")
def converter(x):
    return x


def _tested_helper():
    return 1
'''

NEW_TEST = """\
from pkg._new import _tested_helper


def test_helper():
    assert _tested_helper() == 1
"""


git = git_as_caller


def write(repo, rel, text):
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit(repo, subject):
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", subject)


@pytest.fixture
def repo(tmp_path, request):
    """base: an upstream module; 1: the new module whole, upstream uses first_helper;
    2: a test of _tested_helper; 3: upstream uses later_helper."""
    module = getattr(request, "param", NEW_MODULE)
    repo = new_repository(tmp_path / "tree", {UPSTREAM: "def run(x):\n    return x\n"})
    write(repo, NEW, module)
    write(
        repo,
        UPSTREAM,
        "from pkg._new import first_helper\n\n\ndef run(x):\n    return first_helper(x)\n",
    )
    commit(repo, "one")
    write(repo, TEST, NEW_TEST)
    commit(repo, "two")
    write(
        repo, UPSTREAM, (repo / UPSTREAM).read_text() + "\n\nPATHS = 'later_helper'\n"
    )
    commit(repo, "three")
    return repo


def show(repo, rev, rel):
    return git(repo, "show", f"{rev}:{rel}")


def test_unused_definitions_are_found_by_commit(repo):
    unused = growth.unused_by_commit(str(repo), "base")
    revs = git(repo, "rev-list", "--reverse", "base..HEAD").split()
    # a registering decorator uses its function; a docstring uses nothing
    assert unused[revs[0]] == [f"{NEW}: _tested_helper", f"{NEW}: later_helper"]
    assert unused[revs[1]] == [f"{NEW}: later_helper"]
    assert unused[revs[2]] == []


def test_grow_brings_each_definition_with_its_first_user(repo):
    head = show(repo, "HEAD", NEW)
    assert growth.grow(str(repo), "base") == 2
    assert show(repo, "HEAD", NEW) == head == NEW_MODULE
    first = show(repo, "HEAD~2", NEW)
    assert "def first_helper" in first and "def converter" in first
    assert "LIMIT = 3" in first
    assert "later_helper(" not in first and "_tested_helper" not in first
    # the imports only the later definition used go with it
    assert "import json" not in first and "import os" not in first
    assert "_tested_helper" in show(repo, "HEAD~1", NEW)
    assert "later_helper(" not in show(repo, "HEAD~1", NEW)
    assert git(repo, "log", "--format=%s", "base..HEAD").split() == [
        "three",
        "two",
        "one",
    ]
    assert growth.unused_by_commit(str(repo), "base") == {
        rev: [] for rev in git(repo, "rev-list", "base..HEAD").split()
    }
    # a grown tree is a fixed point
    assert growth.grow(str(repo), "base") == 0


ORPHAN = NEW_MODULE + "\n\ndef orphan():\n    return 0\n"


@pytest.mark.parametrize("repo", [ORPHAN], indirect=True)
def test_a_definition_nothing_ever_uses_stays_from_the_first_commit(repo):
    growth.grow(str(repo), "base")
    assert "def orphan" in show(repo, "HEAD~2", NEW)
    assert show(repo, "HEAD", NEW) == ORPHAN
    assert growth.unused_by_commit(str(repo), "base")[
        git(repo, "rev-parse", "HEAD").strip()
    ] == [f"{NEW}: orphan"]


def test_the_module_text_keeps_its_comments_and_formatting():
    module = growth.Module(NEW, NEW_MODULE)
    kept = set(module.definitions) - {"later_helper"}
    text = growth.grown_source(module, kept)
    assert text.startswith('"""A new module; its docstring names ``later_helper``')
    assert textwrap.dedent(text) == text
    assert "def later_helper" not in text
    assert growth.grown_source(module, set(module.definitions)) == NEW_MODULE


OPTIONAL_IMPORT = (
    "try:\n    from pkg import _pass  # noqa: F401\n\n    PASS = True\n"
    "except ImportError:\n    PASS = False\n\n\ndef test_run():\n"
    "    assert PASS in (True, False)\n"
)


@pytest.mark.parametrize(
    "beside",
    [{}, {TEST: OPTIONAL_IMPORT}],
    ids=["alone", "beside-a-test-importing-it-optionally"],
)
def test_a_module_arrives_with_the_first_commit_that_imports_it(tmp_path, beside):
    """A new module arrives with the commit whose code imports it; a test that
    imports it inside ``try``/``except ImportError`` works without it and does not
    bring it."""
    repo = new_repository(tmp_path / "tree", {UPSTREAM: "def run(x):\n    return x\n"})
    write(
        repo, "py/pkg/_pass.py", '"""A pass."""\n\n\ndef rewrite(gm):\n    return gm\n'
    )
    for rel, text in beside.items():
        write(repo, rel, text)
    commit(repo, "the pass")
    write(repo, UPSTREAM, "from pkg._pass import rewrite\n\nPASSES = [rewrite]\n")
    commit(repo, "registered")
    first = git(repo, "rev-parse", "HEAD~").strip()
    assert growth.unused_by_commit(str(repo), "base")[first] == [
        "py/pkg/_pass.py: (imported by nothing)"
    ]
    assert growth.grow(str(repo), "base") == 1
    assert git(repo, "show", "--name-only", "--format=", "HEAD~").split() == list(
        beside
    )
    assert git(repo, "show", "--name-status", "--format=", "HEAD").split() == [
        "A",
        "py/pkg/_pass.py",
        "M",
        UPSTREAM,
    ]


# the same sentence in a function's docstring instead of the module's
FUNCTION_DOCSTRING = NEW_MODULE.replace(
    "its docstring names ``later_helper``, which does not use it.",
    "a function's docstring names a later one.",
).replace(
    "def first_helper(x):\n",
    'def first_helper(x):\n    """At most ``LIMIT``; :func:`later_helper` uses it."""\n',
)


@pytest.mark.parametrize(
    "repo", [NEW_MODULE, FUNCTION_DOCSTRING], ids=["module", "function"], indirect=True
)
def test_a_docstring_naming_a_later_definition_is_found(repo):
    revs = git(repo, "rev-list", "--reverse", "base..HEAD").split()
    assert growth.docstrings_ahead(str(repo), "base") == {r: [] for r in revs}
    growth.grow(str(repo), "base")
    revs = git(repo, "rev-list", "--reverse", "base..HEAD").split()
    # after growing, the docstring names later_helper before the commit bringing it
    assert growth.docstrings_ahead(str(repo), "base") == {
        revs[0]: [f"{NEW}: later_helper"],
        revs[1]: [f"{NEW}: later_helper"],
        revs[2]: [],
    }
