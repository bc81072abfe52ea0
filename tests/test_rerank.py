"""The reranking stage and its ONNX cross-encoder adapter, on a tiny cross-encoder graph built here.

No cross-encoder can be had offline on this machine, so the adapter's real loading and inference
code runs on a graph with a cross-encoder's interface (input_ids, attention_mask, token_type_ids ->
logits [batch, 1]) whose score is the number of passage tokens, with the real BERT WordPiece
tokenizer of the shared MiniLM export. That makes the expected order computable by hand.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import onnx
import pytest
from conftest import MODEL_PATH, NOW, make_passage
from onnx import TensorProto, helper

from indexer.sqlite_fts import SqliteLexicalIndex
from query.ports import RerankInput
from query.rerank import OnnxCrossEncoder, load_reranker
from query.retrieval import RetrievalSettings, Retriever
from schemas.principal import AccessFilter, Principal


def passage_length_model(folder: Path) -> Path:
    """A graph with a cross-encoder's inputs and output: logit = count of segment-B (passage) tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    nodes = [
        helper.make_node("Mul", ["attention_mask", "token_type_ids"], ["passage_tokens"]),
        helper.make_node("Cast", ["passage_tokens"], ["passage_float"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes", TensorProto.INT64, [1], [1])),
        helper.make_node("ReduceSum", ["passage_float", "axes"], ["logits"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "passage_length", inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, folder / "model.onnx")
    shutil.copy(MODEL_PATH / "tokenizer.json", folder / "tokenizer.json")
    return folder


@pytest.fixture
def cross_encoder(tmp_path: Path) -> OnnxCrossEncoder:
    assert (MODEL_PATH / "tokenizer.json").is_file(), f"needs the shared MiniLM tokenizer at {MODEL_PATH}"
    return OnnxCrossEncoder(passage_length_model(tmp_path / "ce"), batch_size=2)


def test_adapter_scores_pairs_through_the_graph(cross_encoder: OnnxCrossEncoder) -> None:
    inputs = [
        RerankInput("", "short passage"),
        RerankInput("Heading", "a much longer passage with many more words in it"),
        RerankInput("", "three word passage"),
    ]
    scores = cross_encoder.score("what is the question", inputs)
    # [SEP]-terminated segment B: "short passage [SEP]" = 3 tokens; heading line adds its tokens.
    assert scores[0] == 3.0
    assert scores[2] == 4.0
    assert scores[1] > scores[2] > scores[0]


def test_adapter_truncates_long_pairs(tmp_path: Path) -> None:
    encoder = OnnxCrossEncoder(passage_length_model(tmp_path / "ce"), max_tokens=16)
    (score,) = encoder.score("question", [RerankInput("", "word " * 400)])
    assert 0 < score <= 16


def test_retriever_reorders_only_the_fused_top(tmp_path: Path, cross_encoder: OnnxCrossEncoder) -> None:
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    texts = [
        "Backups backups backups.",
        "Backups run nightly and are kept for thirty days in the second region of the provider.",
        "Backups are encrypted.",
        "The cafeteria opens at eight.",
    ]
    lexical.upsert([make_passage(t, anchor=f"p-{i}") for i, t in enumerate(texts)])
    principal = Principal(tenant="acme", user="ann", groups=("staff",))
    access = AccessFilter.for_principal(principal, NOW)
    try:
        plain = Retriever(lexical, None, None, None, RetrievalSettings(rerank_depth=2)).rank("backups", access)
        reranked = Retriever(lexical, None, None, None, RetrievalSettings(rerank_depth=2), cross_encoder).rank(
            "backups", access
        )
        plain_ids = [pid for pid, _ in plain.fused]
        reranked_ids = [pid for pid, _ in reranked.fused]
        assert not plain.reranked and reranked.reranked
        assert sorted(reranked_ids[:2]) == sorted(plain_ids[:2]), "only the top rerank_depth are reordered"
        assert reranked_ids[2:] == plain_ids[2:]
        by_id = reranked.passages
        top = [RerankInput("", by_id[pid].text) for pid in reranked_ids[:2]]
        expected = cross_encoder.score("backups", top)
        assert [reranked.rerank_scores[pid] for pid in reranked_ids[:2]] == expected
        # Two candidates: each standardised part is +-1, so the cross-encoder's preference (weight 1) beats
        # the fused order's (weight 0.5) and the longer passage, fused second, comes first.
        assert expected[0] > expected[1] and reranked_ids[:2] == plain_ids[1::-1]
        assert [score for _, score in reranked.fused[:2]] == [0.5, -0.5]
        result = Retriever(lexical, None, None, None, RetrievalSettings(k=1, rerank_depth=3), cross_encoder).search(
            principal, "backups", NOW
        )
        assert result.passages[0].text.startswith("Backups run nightly")
    finally:
        lexical.close()


def test_no_folder_means_no_reranker_and_a_bad_folder_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert load_reranker(None) is None
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.onnx").write_bytes(b"not a model")
    shutil.copy(MODEL_PATH / "tokenizer.json", tmp_path / "broken" / "tokenizer.json")
    with caplog.at_level(logging.WARNING):
        assert load_reranker(tmp_path / "broken") is None
        assert load_reranker(tmp_path / "missing") is None
    assert sum("Reranker unavailable" in r.message for r in caplog.records) == 2
