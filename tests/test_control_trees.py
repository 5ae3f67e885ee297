"""Control trees: well-formed, projective, seeded, not syntax; and
fairseq-posattn-preprocess --control-trees writes them over the parse's words."""

import numpy as np
import pytest

from fairseq_posattn.structure import CONTROL_TREES, StructureError, check_tree, tree_depths
from fairseq_posattn.structure.control_trees import left_neighbour_heads, random_projective_heads

from conftest import read_trees
from test_translation_struct import SPLITS, bpe_dir, preprocess  # noqa: F401 (fixture)


def dependents(heads):
    """children[h] = the 1-based dependents of word h (0 = the root's)."""
    children = {h: [] for h in range(len(heads) + 1)}
    for d, h in enumerate(heads, 1):
        children[h].append(d)
    return children


def subtree(heads, h):
    children, out, todo = dependents(heads), set(), [h]
    while todo:
        word = todo.pop()
        out.add(word)
        todo.extend(children[word])
    return out


def is_projective(heads):
    """Every word between a head and its dependent is in the head's subtree (naive)."""
    for d, h in enumerate(heads, 1):
        if h == 0:
            continue
        below = subtree(heads, h)
        if any(w not in below for w in range(min(h, d) + 1, max(h, d))):
            return False
    return True


def test_projectivity_check_can_fail():
    assert is_projective([2, 0, 2])
    assert not is_projective([3, 4, 0, 3])  # arcs 1<-3 and 2<-4 cross


def test_left_neighbour_is_the_chain_whose_depth_is_the_position():
    heads = left_neighbour_heads(5)
    assert heads == [0, 1, 2, 3, 4]
    assert tree_depths(heads).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 40, 200])
def test_random_projective_trees_are_single_rooted_projective_trees(n):
    rng = np.random.default_rng(n)
    for _ in range(30):
        heads = random_projective_heads(n, rng)
        check_tree(heads)
        assert len(heads) == n and heads.count(0) == 1
        assert is_projective(heads)


def test_random_projective_trees_vary_like_parses():
    rng = np.random.default_rng(0)
    trees = [tuple(random_projective_heads(6, rng)) for _ in range(400)]
    assert len(set(trees)) > 100
    roots = {t.index(0) for t in trees}
    assert roots == set(range(6))  # any word can be the root
    # heads with two dependents on the same side occur (not only binary trees)
    def two_on_one_side(t):
        kids = dependents(list(t))
        return any(sum(d < h for d in kids[h]) >= 2 or sum(d > h for d in kids[h]) >= 2
                   for h in range(1, 7))
    assert any(map(two_on_one_side, trees))
    depths = [tree_depths(list(t)).max() for t in trees]
    assert min(depths) == 1 and max(depths) >= 4


def test_random_projective_trees_follow_the_seed():
    a = [random_projective_heads(12, np.random.default_rng(3)) for _ in range(3)]
    b = [random_projective_heads(12, np.random.default_rng(3)) for _ in range(3)]
    c = [random_projective_heads(12, np.random.default_rng(4)) for _ in range(3)]
    assert a == b and a != c


@pytest.mark.parametrize("name", sorted(CONTROL_TREES))
def test_an_empty_sentence_has_no_control_tree(name):
    with pytest.raises(StructureError, match="no words"):
        CONTROL_TREES[name](0, np.random.default_rng(0))


@pytest.mark.slow
@pytest.mark.parametrize("control", sorted(CONTROL_TREES))
def test_preprocess_writes_control_trees_over_the_same_pieces(bpe_dir, tmp_path, control):  # noqa: F811
    parsed, wrong, again = tmp_path / "parsed", tmp_path / "wrong", tmp_path / "again"
    preprocess(bpe_dir, parsed)
    preprocess(bpe_dir, wrong, "--control-trees", control)
    preprocess(bpe_dir, again, "--control-trees", control)
    differs = 0
    for split in SPLITS:
        true, controls = (read_trees(dest / f"{split}.en-de.en") for dest in (parsed, wrong))
        assert len(true) == len(controls)
        for (true_heads, true_pieces), (heads, pieces) in zip(true, controls):
            assert len(heads) == len(true_heads)
            check_tree(heads)
            assert is_projective(heads)
            if control == "left-neighbour":
                assert heads == left_neighbour_heads(len(heads))
            differs += heads != true_heads
            assert pieces == true_pieces  # the same words and pieces
        # a rerun writes the same trees
        assert read_trees(again / f"{split}.en-de.en") == controls
    assert differs > 0
