package vsphere

import "testing"

// SetReadPage has the reads of vCenter ask for n objects an answer until t ends.
func SetReadPage(t testing.TB, n int32) {
	old := readPage
	readPage = n
	t.Cleanup(func() { readPage = old })
}
