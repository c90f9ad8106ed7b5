"""``python -m budgetcheck`` runs the ``budgetcheck`` command."""

from budgetcheck.cli import main

if __name__ == "__main__":
    main()
