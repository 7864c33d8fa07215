// Package stats keeps the speed, cache and output statistics that the
// decider's routing policies read on every Decide: typical TTFT per prompt size,
// throughput, cache-hit rate and typical output. The Report stream feeds it
// with observations from real calls and synthetic probes; Decide reads one published summary per series.
//
// # Series
//
// An endpoint id is "provider/model" (provider is everything before the first
// '/', the model id is the rest). Per endpoint the store keeps one TTFT series
// per prompt-size bucket ([tokens.NumBuckets] of them), one
// throughput series and one cache series; per model it keeps one output-tokens
// series. Series are created lazily on their first observation.
//
// # Regions
//
// A reporter may say its region ([Reporter.In]: an edge's --region). Its
// TTFT samples then count twice: in the endpoint's global series and in one
// TTFT series per bucket of that region ([Endpoint.TTFTIn]), so a provider
// fast from one region and slow from another has a figure for each, while
// the global figure still holds every sample. Regions are the reporters'
// word, so the first [MaxRegions] named get series of their own and later
// ones count in the global series only. Routing reads a region's figure
// when it has enough samples and the global one otherwise; which is its
// choice, not the store's. Throughput, cache and output stay global.
//
// # Typical value: a decayed, outlier-aware weighted median
//
// The typical TTFT of a series is the weighted median of its samples inside
// Window. A sample's weight is
//
//	0.5^(age/HalfLife) × (OutlierWeight if the sample is a slow outlier, else 1)
//
// The weighted median is the smallest sample value at which the cumulative
// weight, in ascending value order, reaches half of the total weight; when the
// cumulative weight lands exactly on one half (within a relative 1e-12 on
// either side, so that rounding cannot tip it), it is the mean of that value
// and the next one (so equal weights give the textbook median).
//
// A median rather than a mean because one slow call must move the typical
// value by at most one rank, not by its size. The decay makes a provider that
// slowed down or sped up win the median within minutes: a sample one HalfLife
// newer than another counts twice as much, so a few fresh samples outweigh many
// stale ones. Because every sample's weight decays by the same factor as time
// passes, the passing of time alone never reorders the weights: the typical
// value changes only when a sample arrives or leaves the Window. That is why
// [Store.Refresh] only recomputes the series whose oldest sample has just left
// the Window, and why a series stores each sample's weight relative to a
// reference time of its own instead of to now (2^((at-ref)/HalfLife), the
// same median and the same ratio, without underflow): the weight is computed
// once, when the sample arrives, and a recomputation is a pass of additions.
// The reference time is the newest sample's time rounded down to a multiple
// of 64 half-lives; when a newer sample moves it, the stored weights are
// computed again, so that no weight exceeds 2^64.
//
// # Slow outliers
//
// Once a series has at least MinSamplesForOutliers samples inside the Window,
// a sample is a slow outlier when its value is strictly above Tukey's upper
// fence, Q3 + 1.5×IQR, of the unweighted samples in the Window (quartiles by
// linear interpolation between order statistics, the "type 7" estimator of R
// and NumPy). A slow outlier's weight is multiplied by OutlierWeight (a
// quarter by default). One bad call must not disqualify a good
// provider; Tukey's fence needs no assumption
// about the shape of the TTFT distribution, which is heavy-tailed and
// multi-modal in practice, and no multiplier tuned per model. Below
// MinSamplesForOutliers the quartiles of a handful of samples say nothing, so
// every sample counts fully. Fast outliers are never down-weighted: a provider
// that became faster must be seen. The rule applies to TTFT only.
//
// # Reporters
//
// Each sample carries its reporter ([Store.From]: an edge, by its id; the
// Store's own Observe* record the unnamed one). When a series is computed,
// each reporter's weight (its samples' decay, and outlier, weights summed;
// for the cache rate, weighted prompt tokens) is capped so that none holds
// more than max([MaxShare], 1/k) of the total of the k reporters: the
// heaviest are lowered to one common weight, the others kept. With three
// or more reporters none holds more than a third, so whatever one sends,
// the typical value stays between the others' quartiles (the median must
// reach half the weight, and the others hold two thirds); with two, each
// holds half at most, so neither sets it alone (on an exact tie, the mean
// of both sides); a sole reporter is taken as it is: there is nobody to
// weigh it against. When a series is full, the oldest sample of the
// reporter holding the most samples is evicted, not the oldest of all, so
// a reporter flooding a series evicts its own samples. Reporters are names
// the caller gives; the store tells 4095 apart, and every later name is
// one more reporter.
//
// # The other series
//
//   - Throughput: the decayed weighted median of output tokens per second of
//     completed calls, without the outlier rule.
//   - Cache-hit rate: Σ w·cached / Σ w·prompt over the calls in the Window, with
//     the same decay weights, so a large prompt counts for its size.
//   - Typical output: the decayed weighted median of a model's output tokens per
//     call, rounded to a whole token, without the outlier rule.
//
// # Window and aging
//
// A sample older than Window (at ≤ now − Window) is dropped: when it is
// observed, when its series is next recomputed, and by [Store.Refresh], which
// the decider calls every second. A timestamp in the future (an edge whose
// clock is ahead) is taken as now, so clock skew cannot give a sample more than
// full weight. The zero time means now.
//
// # Memory bound
//
// Each series holds at most MaxSamples samples; when it is full, the sample
// with the oldest timestamp is evicted (a sample older than all it holds is
// not stored). Buffers grow on demand, so an idle series costs only its fixed
// header. The worst case, every series full, is per endpoint
// (NumBuckets+1)·MaxSamples·32 B + MaxSamples·40 B + about 0.6 KB of headers
// (plus, per region that reported on it, NumBuckets·MaxSamples·32 B and
// about 0.4 KB: 8 KB per region with the defaults)
// (a sample is its time, its values, its stored weight and its reporter),
// plus 24 B per reporter of a series for its scratch: about 13 KB with the
// default 64 samples, so about 265 MB for 1000 models × 20 endpoints, plus
// about 2 KB per model for its output series. Realistic
// traffic fills far less: a bucket that only probes reach holds three samples
// per Window.
//
// # Concurrency and cost
//
// Observe* may be called from any number of goroutines: each series has its
// own mutex, held for one O(MaxSamples) insertion and recomputation, so writers
// of different series never contend. Readers never lock: endpoints are found in
// a [sync.Map] (the case it is built for: keys written once, read many times)
// and each summary is published through a sequence lock made of atomics, so a
// read costs a map lookup and a few atomic loads and allocates nothing. A
// caller that resolves its endpoints once ([Store.Endpoint], [Store.Model])
// skips the lookup too, which is most of the cost of a read.
//
// # Snapshots
//
// [Store.Snapshot] encodes the state as one blob per model id, so that a blob
// stays far below etcd's 1.5 MiB value limit: with the default settings at
// most about 6.4 KB per endpoint of the model plus 1 KB for the model (129 KB
// measured for 20 endpoints with every series full, TestSnapshotSize), so a
// model would need about 240 endpoints to reach the limit. Regional series
// add about 4.3 KB per region and endpoint when full; a shard that would
// pass 1 MiB with them is written without them (the global series kept,
// the regions learning theirs again), TestSnapshotOfManyRegionsStaysBounded. A blob is a
// protobuf switchboard.state.v1.StatsShard (proto/switchboard/state/v1/
// state.proto), encoded deterministically: the bucket count, the model id,
// the names of the reporters its samples come from (in order of first use),
// the model's output series, then each endpoint's id and series, its
// regions' TTFT series by region name last. A series is
// its newest sample's time and, as parallel lists, each sample's offset from
// that time, its IEEE 754 values and its reporter's index in the blob's
// names, so a round trip is exact and an unchanged state encodes to the same
// bytes. A blob that does not decode, has another bucket count or holds an
// impossible value (a reporter not in its names, a time out of range, a
// negative TTFT, a cache hit above its total, an endpoint of another model) is
// refused whole rather than half-loaded.
package stats
