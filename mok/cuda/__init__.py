"""The SM90 megakernel (forward) and its JIT build; see README.md here. Importing this package builds nothing."""
