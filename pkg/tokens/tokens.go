// Package tokens counts prompt tokens with one deterministic rule shared by the
// edge's estimator and the provider simulator, and maps a prompt size to the
// size buckets that routing keeps statistics for.
//
// The rule (documented in docs/routing.md, relied upon by tests that aim at a size
// bucket):
//
//   - text costs ceil(len(utf8 bytes) / 4) tokens (0 for empty text);
//   - every chat message costs MessageOverhead tokens plus the tokens of its
//     role, name and content text;
//   - a prompt costs PromptOverhead tokens plus the sum of its messages.
//
// It is an approximation of BPE tokenisers for English text (about 4 bytes a
// token) that needs no vocabulary and gives the same answer everywhere.
package tokens

// BytesPerToken is the number of UTF-8 bytes counted as one token.
const BytesPerToken = 4

// MessageOverhead is the number of tokens each message costs on top of its text,
// for the role markers a chat template adds.
const MessageOverhead = 4

// PromptOverhead is the number of tokens a whole prompt costs on top of its
// messages, for the assistant priming a chat template adds.
const PromptOverhead = 3

// K is the size unit of the buckets: 1024 tokens.
const K = 1024

// Text returns the token count of s.
func Text(s string) int64 {
	return (int64(len(s)) + BytesPerToken - 1) / BytesPerToken
}

// Message is the part of a chat message that is counted.
type Message struct {
	Role    string
	Name    string
	Content string
}

// MessageTokens returns the token count of one message.
func MessageTokens(m Message) int64 {
	return MessageOverhead + Text(m.Role) + Text(m.Name) + Text(m.Content)
}

// Prompt returns the token count of a whole prompt.
func Prompt(msgs []Message) int64 {
	n := int64(PromptOverhead)
	for _, m := range msgs {
		n += MessageTokens(m)
	}
	return n
}

// Bucket is a prompt-size bucket: routing keeps its speed statistics,
// and compares endpoints, per bucket.
type Bucket int

// The size buckets, by prompt tokens (k = 1024).
const (
	BucketUnder8K   Bucket = iota // fewer than 8k tokens
	Bucket8KTo32K                 // 8k up to 32k
	Bucket32KTo128K               // 32k up to 128k
	BucketOver128K                // 128k and more
	NumBuckets      = 4
)

// BucketOf returns the size bucket of a prompt of n tokens.
func BucketOf(n int64) Bucket {
	switch {
	case n < 8*K:
		return BucketUnder8K
	case n < 32*K:
		return Bucket8KTo32K
	case n < 128*K:
		return Bucket32KTo128K
	default:
		return BucketOver128K
	}
}

// String returns the bucket's label as shown in explanations and metrics.
func (b Bucket) String() string {
	switch b {
	case BucketUnder8K:
		return "<8k"
	case Bucket8KTo32K:
		return "8k-32k"
	case Bucket32KTo128K:
		return "32k-128k"
	case BucketOver128K:
		return ">128k"
	}
	return "unknown"
}
