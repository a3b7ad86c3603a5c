import sys

from docsgen.build import main

sys.exit(main(sys.argv[1:]))
