// Opens its argument the way a Node tool does: the `open` package, its defaults (on
// Linux it runs its bundled xdg-open, detached, and resolves once that has started).
import open from 'open';

await open(process.argv[2]);
