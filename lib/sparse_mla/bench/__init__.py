"""Benchmarks on a CUDA GPU, each against a peer in the same run (not tests): :mod:`.kernel` (sparse MLA attention
against vLLM's FlashMLA sparse kernels); :mod:`.common` (the record header every benchmark writes)."""
