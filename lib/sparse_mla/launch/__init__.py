"""Step 5, *launch GLM-5*: a GLM-5-architecture checkpoint through vLLM on the workbook's backend.

* :mod:`.checkpoint` -- a tiny checkpoint with GLM-5's attention geometry, random weights and a locally built
  tokenizer (``sparse-mla make-checkpoint``, ``--mtp`` for GLM-5's MTP layer; nothing downloaded);
* :mod:`.glm5_reference` -- an independent PyTorch forward of that architecture (the parity oracle);
* :mod:`.specs` -- what one engine run is: run specs (``BACKEND[+TRITON_DSA_INDEXER]``), the backend names vLLM
  accepts for the 576-wide MLA head, ``--speculative-config``, the ``SPARSE_MLA_SIMULATED_CAPABILITY`` report;
* :mod:`.server` -- ``vllm serve`` as a child process (free port, readiness, always stopped);
* :mod:`.engine` -- ``vllm.LLM`` offline, ``vllm serve`` with the ``openai`` client, and the parity record
  (``sparse-mla launch``).
"""
