from pdtui.cli import main

raise SystemExit(main())
