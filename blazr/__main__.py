from blazr.cli import main

main()
