"""The GEMV family: small-M ``Y = A · dequant(B)ᵀ`` for the routes ``gemv_w4``, ``gemv_w8``, ``gemv_w2``
and ``router_gemv``.

Route families (each exports ``FAMILY``): ``w4``, ``w8``, ``w2``, ``router``. fp16/bf16 activations
run on tensor cores (``mma``: packed layout ``layout``, built on the device by ``repack``, generated
kernels ``mma_source`` / ``mma_ring``, launch shapes ``tactics``); fp32 activations, the router and
unaligned A run on the fused CUDA-core engine (``core_source`` generates it, ``core`` plans it). Importing this package imports nothing.
"""
