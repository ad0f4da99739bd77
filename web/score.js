// The HUD's score at a song time, from the note and wall events. The points of each cut
// (with its scoring type's fixed parts) come from the decoder (the library's
// NoteEvent::score); this applies the combo multiplier as proto-spec/bsor-v1.md and the
// library's replay_score do: 1, 2, 4, 8, raised after 2, 4, 8 good cuts in a row at the
// current multiplier, halved by a bad cut, a miss, a bomb or a wall; events in time order,
// notes before walls at equal times.

const GOOD = 1;
const UNKNOWN_FIRST = 5;

function fresh() {
  return { total: 0, max: 0, multiplier: 1, progress: 0, maxMultiplier: 1, maxProgress: 0,
    combo: 0, misses: 0, bombs: 0 };
}

export class Score {
  constructor() {
    this.reset();
  }

  reset() {
    this.notes = [];
    this.walls = [];
    this.state = fresh();
    this.n = 0;
    this.w = 0;
    this.t = -Infinity;
  }

  // The event lists (sorted by time) changed; `earliest` is the earliest new event's time.
  setEvents(notes, walls, earliest) {
    this.notes = notes;
    this.walls = walls;
    if (earliest <= this.t) this.restart();
  }

  restart() {
    this.state = fresh();
    this.n = 0;
    this.w = 0;
    this.t = -Infinity;
  }

  // Takes every event up to song time t (from the start again if t is earlier than before).
  advanceTo(t) {
    if (t < this.t) this.restart();
    const s = this.state;
    for (;;) {
      const note = this.notes[this.n];
      const wall = this.walls[this.w];
      const noteDue = note && note.t <= t;
      const wallDue = wall && wall.t <= t;
      if (!noteDue && !wallDue) break;
      if (noteDue && (!wallDue || note.t <= wall.t)) {
        this.n++;
        this.note(s, note);
      } else {
        this.w++;
        this.decrease(s);
        s.combo = 0;
      }
    }
    this.t = t;
  }

  decrease(s) {
    s.progress = 0;
    if (s.multiplier > 1) s.multiplier /= 2;
  }

  note(s, n) {
    if (n.outcome >= UNKNOWN_FIRST || n.outcome < GOOD) return;
    if (n.most > 0) {
      // The most this note could have given, had every note been cut perfectly.
      if (s.maxMultiplier < 8 && ++s.maxProgress >= s.maxMultiplier * 2) {
        s.maxMultiplier *= 2;
        s.maxProgress = 0;
      }
      s.max += n.most * s.maxMultiplier;
    }
    if (n.outcome === GOOD) {
      if (s.multiplier < 8 && ++s.progress >= s.multiplier * 2) {
        s.multiplier *= 2;
        s.progress = 0;
      }
      s.total += n.points * s.multiplier;
      s.combo++;
      return;
    }
    this.decrease(s);
    s.combo = 0;
    if (n.outcome === 4) s.bombs++;
    else s.misses++;
  }
}
