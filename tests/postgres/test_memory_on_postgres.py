"""The hybrid front door's behaviour tests (``tests/memory/test_memory.py``), on PostgreSQL.

``make_vector_store`` here builds ``VectorMemoryStore(PostgresGameMemoryStore,
PostgresVectorIndex, provider)`` (see this folder's conftest), so the same tests that hold
the file backend to the front door's contract hold the PostgreSQL pair to it. Left out:
the tests about folders (an index folder inside the save; option bounds checked before any
folder is opened) and the one that asserts the save is a ``FileGameMemoryStore``.
"""

from __future__ import annotations

from memory.test_memory import (
    test_a_memory_found_by_both_channels_carries_both_ranks,
    test_a_provider_may_return_plain_float_sequences,
    test_a_query_without_text_is_answered_lexically_without_embedding,
    test_a_reranker_returning_a_memory_it_was_not_given_is_refused,
    test_a_vector_computed_from_other_content_is_never_used,
    test_a_vector_failure_never_undoes_the_authoritative_append,
    test_an_embedding_timeout_during_append_is_reported_and_the_memory_stays_recallable,
    test_appending_again_after_a_failed_embedding_gives_the_memory_its_vector,
    test_appending_an_equivalent_memory_again_does_not_embed_it_again,
    test_authoritative_errors_propagate_and_nothing_is_embedded_then,
    test_closing_is_idempotent_and_later_calls_raise_store_closed,
    test_every_stage_reports_duration_and_counts_and_never_text_or_ids,
    test_fail_when_embedding_unavailable_raises_but_the_memory_stays_saved,
    test_fusion_then_the_reranker_then_the_limit,
    test_limit_zero_recalls_nothing_and_embeds_nothing,
    test_more_vectors_than_a_search_may_compare_fall_back_to_lexical,
    test_recalled_memories_are_instances_of_the_authoritative_snapshot,
    test_search_never_returns_another_sessions_memories,
    test_semantic_recall_finds_a_paraphrase_sharing_no_word_with_the_query,
    test_stale_vectors_raise_when_semantic_recall_is_required,
    test_the_hybrid_store_answers_the_reference_stores_calls,
    test_the_provider_is_left_open_when_the_store_does_not_own_it,
    test_the_reranker_sees_min_of_maximum_candidates_and_limit_times_multiplier,
    test_the_snapshot_of_a_search_is_bounded,
    test_vectors_of_another_model_are_stale_and_recall_is_lexical_until_a_rebuild,
    test_vectors_of_memories_absent_from_the_save_never_enter_results,
    test_visibility_filters_hold_on_the_vector_path,
)

__all__ = [
    "test_a_memory_found_by_both_channels_carries_both_ranks",
    "test_a_provider_may_return_plain_float_sequences",
    "test_a_query_without_text_is_answered_lexically_without_embedding",
    "test_a_reranker_returning_a_memory_it_was_not_given_is_refused",
    "test_a_vector_computed_from_other_content_is_never_used",
    "test_a_vector_failure_never_undoes_the_authoritative_append",
    "test_an_embedding_timeout_during_append_is_reported_and_the_memory_stays_recallable",
    "test_appending_again_after_a_failed_embedding_gives_the_memory_its_vector",
    "test_appending_an_equivalent_memory_again_does_not_embed_it_again",
    "test_authoritative_errors_propagate_and_nothing_is_embedded_then",
    "test_closing_is_idempotent_and_later_calls_raise_store_closed",
    "test_every_stage_reports_duration_and_counts_and_never_text_or_ids",
    "test_fail_when_embedding_unavailable_raises_but_the_memory_stays_saved",
    "test_fusion_then_the_reranker_then_the_limit",
    "test_limit_zero_recalls_nothing_and_embeds_nothing",
    "test_more_vectors_than_a_search_may_compare_fall_back_to_lexical",
    "test_recalled_memories_are_instances_of_the_authoritative_snapshot",
    "test_search_never_returns_another_sessions_memories",
    "test_semantic_recall_finds_a_paraphrase_sharing_no_word_with_the_query",
    "test_stale_vectors_raise_when_semantic_recall_is_required",
    "test_the_hybrid_store_answers_the_reference_stores_calls",
    "test_the_provider_is_left_open_when_the_store_does_not_own_it",
    "test_the_reranker_sees_min_of_maximum_candidates_and_limit_times_multiplier",
    "test_the_snapshot_of_a_search_is_bounded",
    "test_vectors_of_another_model_are_stale_and_recall_is_lexical_until_a_rebuild",
    "test_vectors_of_memories_absent_from_the_save_never_enter_results",
    "test_visibility_filters_hold_on_the_vector_path",
]
