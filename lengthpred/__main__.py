"""`python -m lengthpred ...`: the `lengthpred` command (lengthpred.command)."""

from lengthpred.command import main

main()
