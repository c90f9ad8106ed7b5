"""budgets, exact window sums, the three ledgers and their operations; imports nothing above it"""
