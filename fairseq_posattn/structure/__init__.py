"""Pure dependency-tree logic for structural position representations
(Wang et al. 2019, *Self-Attention with Structural Position Representations*,
Sec. 3.1): CoNLL-U input/output, tree depths (absolute structural positions),
relative structural positions, subword pieces -> words, and the batched
piece-level structure the data collater needs; also the dependency distances
and PASCAL's parent positions (Bugliarello & Okazaki 2020) over pieces.

Depends on numpy, torch and ``conllu`` only (not on fairseq).
"""

from .batch import (WANG_TREE_INPUTS, TreeInputs, batch_encoded_parent_positions, batch_encoded_structure,
                    batch_encoded_tree_distances, batch_piece_structure, batch_tree_inputs, batch_trees_of_pieces,
                    tree_inputs_of)
from .conllu_io import read_conllu, write_conllu
from .control_trees import CONTROL_TREES
from ..errors import StructureError
from .pieces import (SCHEMES, SUBWORD_MODELS, decode_piece_tree, encode_piece_tree,
                     piece_word_map, segment_pieces, words_from_pieces)
from .tree import (
    PARENT_ANCHORS,
    RULES,
    DependencyTree,
    check_tree,
    collapse_multiword_tokens,
    piece_parent_positions,
    piece_structure,
    piece_tree_distances,
    relative_structural_positions,
    tree_depths,
    tree_distances,
)

__all__ = [
    "CONTROL_TREES", "PARENT_ANCHORS", "RULES", "SCHEMES", "SUBWORD_MODELS", "DependencyTree", "StructureError",
    "TreeInputs", "WANG_TREE_INPUTS",
    "batch_encoded_parent_positions", "batch_encoded_structure", "batch_encoded_tree_distances", "batch_piece_structure",
    "batch_tree_inputs", "batch_trees_of_pieces", "check_tree", "collapse_multiword_tokens", "decode_piece_tree",
    "encode_piece_tree", "piece_parent_positions", "piece_structure", "piece_tree_distances", "piece_word_map",
    "read_conllu", "relative_structural_positions", "segment_pieces", "tree_depths", "tree_distances",
    "tree_inputs_of", "words_from_pieces", "write_conllu",
]
