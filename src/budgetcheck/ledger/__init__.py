"""The ledgers and their exact arithmetic: budgets and parameters, exact window sums, the three
ledgers (w-event, personalized, Swellfish) and their charged operations, the noise samplers,
AboveThreshold, the query vocabulary and its sensitivities, the brute-force auditors; the hook
chain its charged operations run through (``hooks``) and the named interface the layers above use
to install hooks (``access``).

With :mod:`budgetcheck.stream` it forms the core: the ledgers read secrets, the streams carry the
ledgers' errors and validation. The core imports only itself, ``kernels``, ``rounding`` and
``ops`` (numpy, numba, attrs); never the durable, verification, benchmark or CLI layers.
"""
