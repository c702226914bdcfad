from fedopt.cli import main

raise SystemExit(main())
