"""Timeline storage: the only place seqs and epochs are minted."""
