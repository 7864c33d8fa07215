package httpapi

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseActivityQuery(t *testing.T) {
	tests := []struct {
		name      string
		query     string
		wantParam string // empty: valid
		check     func(t *testing.T, r *switchboardv1.ListActivityRequest)
	}{
		{name: "defaults", query: "", check: func(t *testing.T, r *switchboardv1.ListActivityRequest) {
			require.EqualValues(t, DefaultActivityLimit, r.GetLimit())
			require.Nil(t, r.GetStartTime())
			require.Nil(t, r.GetEndTime())
			require.Empty(t, r.GetModel())
			require.Empty(t, r.GetCursor())
		}},
		{name: "rfc3339 and unix", query: "start=2026-10-28T09:00:00Z&end=1793264400", check: func(t *testing.T, r *switchboardv1.ListActivityRequest) {
			require.Equal(t, time.Date(2026, 10, 28, 9, 0, 0, 0, time.UTC), r.GetStartTime().AsTime())
			require.Equal(t, time.Unix(1793264400, 0).UTC(), r.GetEndTime().AsTime())
		}},
		{name: "offset and fraction", query: "start=2026-10-28T11:00:00.5%2B02:00", check: func(t *testing.T, r *switchboardv1.ListActivityRequest) {
			require.Equal(t, time.Date(2026, 10, 28, 9, 0, 0, 5e8, time.UTC), r.GetStartTime().AsTime())
		}},
		{name: "limits", query: "limit=1&model=org/m&cursor=abc", check: func(t *testing.T, r *switchboardv1.ListActivityRequest) {
			require.EqualValues(t, 1, r.GetLimit())
			require.Equal(t, "org/m", r.GetModel())
			require.Equal(t, "abc", r.GetCursor())
		}},
		{name: "max limit", query: "limit=500", check: func(t *testing.T, r *switchboardv1.ListActivityRequest) {
			require.EqualValues(t, 500, r.GetLimit())
		}},
		{name: "bad start", query: "start=tomorrow", wantParam: "start"},
		{name: "milliseconds are not seconds", query: "start=1793264400000000", wantParam: "start"},
		{name: "negative unix", query: "end=-1", wantParam: "end"},
		{name: "end before start", query: "start=2026-10-28T09:00:00Z&end=2026-10-28T08:00:00Z", wantParam: "end"},
		{name: "end equals start", query: "start=1793264400&end=1793264400", wantParam: "end"},
		{name: "zero limit", query: "limit=0", wantParam: "limit"},
		{name: "big limit", query: "limit=501", wantParam: "limit"},
		{name: "word limit", query: "limit=all", wantParam: "limit"},
		{name: "control char in model", query: "model=a%0Ab", wantParam: "model"},
		{name: "long cursor", query: "cursor=" + strings.Repeat("c", maxCursorBytes+1), wantParam: "cursor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			require.NoError(t, err)
			r, aerr := parseActivityQuery(q)
			if tt.wantParam != "" {
				require.NotNil(t, aerr)
				require.Equal(t, tt.wantParam, aerr.param)
				require.Equal(t, 400, aerr.status)
				return
			}
			require.Nil(t, aerr)
			tt.check(t, r)
		})
	}
}
