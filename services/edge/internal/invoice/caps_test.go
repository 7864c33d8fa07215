package invoice

import (
	"testing"

	"github.com/stretchr/testify/require"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

func TestCapPrice(t *testing.T) {
	p := func(f float64) *float64 { return &f }
	tests := []struct {
		name            string
		decider, client *switchboardv1.MaxPrice
		want            *switchboardv1.MaxPrice
	}{
		{name: "none", want: nil},
		{name: "decider only", decider: &switchboardv1.MaxPrice{Prompt: p(1)}, want: &switchboardv1.MaxPrice{Prompt: p(1)}},
		{name: "client only", client: &switchboardv1.MaxPrice{Completion: p(2)}, want: &switchboardv1.MaxPrice{Completion: p(2)}},
		{name: "lower of each", decider: &switchboardv1.MaxPrice{Prompt: p(1), Completion: p(5)}, client: &switchboardv1.MaxPrice{Prompt: p(3), Completion: p(2)},
			want: &switchboardv1.MaxPrice{Prompt: p(1), Completion: p(2)}},
		{name: "zero is a cap", decider: &switchboardv1.MaxPrice{}, client: &switchboardv1.MaxPrice{Prompt: p(0)},
			want: &switchboardv1.MaxPrice{Prompt: p(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := capPrice(tt.decider, tt.client)
			if tt.want == nil {
				require.Nil(t, got)
				return
			}
			require.Equal(t, tt.want.Prompt == nil, got.Prompt == nil)
			require.Equal(t, tt.want.Completion == nil, got.Completion == nil)
			require.Equal(t, tt.want.GetPrompt(), got.GetPrompt())
			require.Equal(t, tt.want.GetCompletion(), got.GetCompletion())
		})
	}
}
