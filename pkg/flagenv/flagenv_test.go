package flagenv

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    string
		wantN   int
		wantErr string
	}{
		{name: "default", want: "d", wantN: 1},
		{name: "env", env: map[string]string{"X_DATA_DIR": "e", "X_COUNT": "3"}, want: "e", wantN: 3},
		{name: "flag beats env", env: map[string]string{"X_DATA_DIR": "e"}, args: []string{"--data-dir=f"}, want: "f", wantN: 1},
		{name: "bad env", env: map[string]string{"X_COUNT": "many"}, wantErr: `X_COUNT="many"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			dir := fs.String("data-dir", "d", "")
			n := fs.Int("count", 1, "")
			err := Parse(fs, "X", tt.args, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, *dir)
			require.Equal(t, tt.wantN, *n)
		})
	}
}
