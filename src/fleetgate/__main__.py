from fleetgate.launch import main

raise SystemExit(main())
