package placement

// InternedShapes counts the compiled profile tables the process-wide cache
// refers to, live or collected but not yet swept.
func InternedShapes() int {
	shapes.Lock()
	defer shapes.Unlock()
	n := 0
	for _, l := range shapes.m {
		n += len(l)
	}
	return n
}

// SameTable reports whether two grids share one compiled profile table.
func SameTable(a, b *Grid) bool { return a.shape == b.shape }
