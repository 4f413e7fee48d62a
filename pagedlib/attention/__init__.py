"""Attention through a block table: the plain-PyTorch lessons, the input checks, and the two backends
a model can run on (one interface: ``write_kv``, ``decode``, ``prefill``).

===================  ======================================================  =========
module               idea                                                    chapters
===================  ======================================================  =========
``reference``        attention through a page table, one sequence at a time  5
``page_by_page``     the same attention read page by page, with an online        5, 8
                     softmax: the loop the kernels start from
``checks``           the input checks shared by the references and kernels   5, 8
``metadata``         ``PagedBatch``: one forward pass's tokens, slots and    10
                     tables (the engine builds it)
``torch_backend``    the whole batch in PyTorch (the default on a CPU)       10
``triton_backend``   the Triton kernels' launchers (decode, split-K,         8, 9
                     prefill, write) and the backend built on them
``kernels``          the Triton kernels themselves, and ``kernels.launch``:  8, 9
                     every number they are launched with
===================  ======================================================  =========
"""
from ..lazy import lazy_submodules

__getattr__, __dir__ = lazy_submodules(__name__, ("reference", "page_by_page", "checks", "metadata", "torch_backend",
                                                  "triton_backend", "kernels"))
