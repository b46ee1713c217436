"""Semantic recall: embedding identity and provider protocol, derived index, fusion, reranker."""
