"""Loops that are not the causal-LM engine: embed (sentence vectors, reranker scores); speech comes next."""
