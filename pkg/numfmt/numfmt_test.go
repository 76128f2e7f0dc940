package numfmt

import "testing"

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 20000: "20,000", 1234567: "1,234,567",
		-1: "-1", -999: "-999", -1000: "-1,000", -1234567: "-1,234,567",
	} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Thousands(20000); got != "20,000" {
		t.Errorf("Thousands(int 20000) = %q", got)
	}
}
