from dsim.cli import main

main()
