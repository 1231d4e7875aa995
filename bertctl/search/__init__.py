"""What searching needs that is not a task family: exact ranking and its metrics' inputs
(ranking), approximate search (approximate), BM25 and fusion (lexical), late interaction
(late). Pure numpy and torch: no task, no stage."""
