from fasttrack.cli import main

main()
