import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line's module loads: still one line
    sys.stderr.write("paritygate: aborted (SIGINT)\n")
    sys.exit(2)

sys.exit(main())
