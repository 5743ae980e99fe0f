"""The layer library every model family builds from: each layer declares its weights once (layers.module).

module      Module, Weight: declared weights -> shapes, strict check, loading
norm        RMSNorm, LayerNorm
embedding   Embedding: token embeddings and the LM head
rope        RoPE frequency tables (default, linear, dynamic NTK, llama3, YaRN, LongRoPE, llama.cpp freq factors)
attention   self-attention over the paged KV cache (fused q/k/v, biases, rope, sliding window, soft-capping)
mlp         gated MLP (SwiGLU and kin)
"""
