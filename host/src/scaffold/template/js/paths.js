import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const FIXTURES = join(here, '..', 'fixtures');
export const DEFAULT_SPEC = join(here, '..', 'wit', 'default-pod-spec.json');
