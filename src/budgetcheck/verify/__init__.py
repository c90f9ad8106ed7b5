"""Verification: the stages of ``budgetcheck verify`` (replay, secret access, exploration and rule
conformance, proof, statistical audit), the verdicts, non-interference, the Z3 adapter and the
reports. Imports every layer below it except the benchmark and the CLI; hypothesis, z3, scipy
and matplotlib load here (and in ``proving``, ``strategies``) only. Nothing in the runtime imports it.
"""
