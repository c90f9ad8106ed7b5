"""verification: replay, exploration, non-interference, statistical audit, proofs; imports every layer below, never imported by the runtime"""
