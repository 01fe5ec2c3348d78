"""Step 4, *launch GLM-5*: a GLM-5-architecture checkpoint through vLLM on the workbook's backend.

* :mod:`.checkpoint` -- a tiny checkpoint with GLM-5's attention geometry, random weights and a locally built
  tokenizer (``sparse-mla make-checkpoint``; nothing downloaded);
* :mod:`.glm5_reference` -- an independent PyTorch forward of that architecture (the parity oracle);
* :mod:`.engine` -- ``vllm.LLM`` offline, ``vllm serve`` with the ``openai`` client, and the parity record
  (``sparse-mla launch``).
"""
