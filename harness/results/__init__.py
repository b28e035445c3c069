"""What a run leaves: raw records, the results folder, and the typed Run loaded from it."""
