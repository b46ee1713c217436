"""Tests of the semantic half: identity, derived index, fusion, reranker, hybrid store."""
