"""fairseq-posattn-param-count: the split adds up and the encoders have the
per-layer counts of Hao et al. (2019) at d=512 (LSTM 4,727,296, ON-LSTM
6,828,544 with biases on both gate projections, SAN 3,152,384)."""

import pytest

from fairseq_posattn.analysis import param_count

LSTM, ONLSTM, SAN = 4_727_296, 6_828_544, 3_152_384


@pytest.mark.parametrize("arch, encoder", [
    ("transformer", 6 * SAN),
    ("transformer_lstm6", 6 * LSTM),
    ("transformer_onlstm6", 6 * ONLSTM),
    ("onlstm_san_transformer", 3 * ONLSTM + 3 * SAN),
    ("transformer_san3_onlstm3", 3 * ONLSTM + 3 * SAN),
    ("transformer_san10", 10 * SAN),
])
def test_encoder_counts_and_split(arch, encoder, capsys):
    parts = param_count.main(["--arch", arch, "--vocab", "42830",
                                "--share-decoder-input-output-embed"])
    assert parts["encoder"] == encoder
    # source and target embeddings (the output projection shares the target's)
    assert parts["embeddings"] == 2 * 42830 * 512
    assert parts["total"] == parts["embeddings"] + parts["encoder"] + parts["decoder"]
    assert f"{parts['total']:,}" in capsys.readouterr().out


def test_shared_embeddings_count_once():
    parts = param_count.main(["--arch", "transformer", "--vocab", "1000", "--share-all-embeddings"])
    assert parts["embeddings"] == 1000 * 512
