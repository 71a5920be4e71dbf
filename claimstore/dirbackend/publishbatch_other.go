//go:build !linux

package dirbackend

// openTempBudget is how many temporaries PublishBatch keeps open at once.
func openTempBudget() int { return 256 }
