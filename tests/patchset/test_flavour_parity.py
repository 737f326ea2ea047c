"""One series serves both wheels: patched sources are identical between flavours (outside fx/)."""

from patchset import tree


def test_patched_sources_identical_between_flavours():
    assert tree.flavour_differences() == {}
