"""GLM-5 (``glm-dsa``) GGUF files, the format's facts in one place, on the shared vocabulary floor: it imports nothing
of the package but :mod:`sparse_mla.errors`, and vLLM only where :mod:`.files` asks vllm-gguf-plugin's own file
discovery (the plugin imports vLLM), as the plugin would find the files; gguf-py only inside the functions that read
or write a file.

* :mod:`.files` -- which files a GGUF ``--model`` is (one file, a split model's shards, ``DIR:QUANT``), each read
  once by gguf-py, and :func:`~.files.is_gguf`, the one answer to whether a ``--model`` names a GGUF;
* :mod:`.types` -- the GGUF type table (block sizes, the types vllm-gguf-plugin keeps unquantized);
* :mod:`.names` -- the ``glm-dsa`` tensor name map: GGUF names, Hugging Face names, the names vLLM loads;
* :mod:`.metadata` -- the Hugging Face config a GGUF's metadata describes (config-from-GGUF), the file type;
* :mod:`.tensors` -- the files' tensors against a config: shards, indexer tensors, coverage, shapes;
* :mod:`.dequantize` -- tensors back as float arrays in the checkpoint's layout (gguf-py's dequantization);
* :mod:`.writer` -- a GLM-5 checkpoint written as llama.cpp's converter lays ``glm-dsa`` out;
* :mod:`.quant` -- the GGML encodings the writer uses (gguf-py's, and numpy Q4_K / Q6_K) and their error bounds.

What vLLM does with a GGUF is not here: vllm-gguf-plugin's weights adapter is
:mod:`sparse_mla.vllm_plugin.gguf_adapter`, the diagnosis's checks are :mod:`sparse_mla.diagnose.gguf` and its
neighbours, and launch reads a GGUF back as a checkpoint in :mod:`sparse_mla.launch.gguf_reader`.
"""
