from lowtide.cli import main

main()
