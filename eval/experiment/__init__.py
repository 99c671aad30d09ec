"""What every experiment needs: datasets, metrics, the prediction log, run facts, tables; and the one-step
retrieval recall command."""
