package jsonscan

// Pieces follows a JSON object or array as it arrives in pieces, to tell
// when it is whole: its brackets balanced outside strings. It checks
// nothing else (a stream's reader parses the value once it has it all), and
// keeps no copy of what it was fed. The zero Pieces is ready to follow a
// value.
type Pieces struct {
	depth            int
	started, ended   bool
	inString, escape bool
}

// Feed follows the next piece of the value; what comes after the value's
// end is ignored.
func (p *Pieces) Feed(piece string) {
	for i := 0; i < len(piece) && !p.ended; i++ {
		c := piece[i]
		switch {
		case p.inString && p.escape:
			p.escape = false
		case p.inString && c == '\\':
			p.escape = true
		case p.inString:
			p.inString = c != '"'
		case c == '"':
			p.inString = true
		case c == '{' || c == '[':
			p.depth++
			p.started = true
		case c == '}' || c == ']':
			p.depth--
			p.ended = p.started && p.depth <= 0
		}
	}
}

// Whole reports whether the object or array is complete; a value that is
// neither (a bare string) is never known to be.
func (p *Pieces) Whole() bool { return p.ended }
