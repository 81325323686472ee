"""The TensorFlow side of training: the workers' parameters as rows of one ``[M, P]`` matrix.

:class:`StackedTrainer` holds the hosted workers' stacked parameters and compiles what runs on them:
the local steps (one worker at a time inside one XLA program), the mixing of each row with its
neighbours' rows, the asynchronous events of gossip (:meth:`StackedTrainer.run_events`), and the
evaluation sums.  It knows nothing of time: the engines (:mod:`.engine`, :mod:`.event_engine`,
:mod:`.mpi`) tell it which weights, minibatches and learning rates each iteration or event uses.

A network whose ``jit_compile`` is false (Keras models by default: XLA's CPU convolutions are far slower
than TensorFlow's own kernels) runs its local steps and evaluation sums as TensorFlow graphs instead --
still one fixed-shape program per worker -- and its mixing as the XLA program every network uses, called
after the step as the MPI backends call it.

A minibatch is either its indices ``[M, B]`` or, with augmentation, ``(indices, draws)`` with the crop
draws ``[M, B, 3]`` of :mod:`.augment`.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .augment import crop_and_flip
from .tf_setup import compiled, import_tensorflow

# Samples per piece of the average model's evaluation: processes share the pieces, and each piece is
# summed by the same program wherever it runs.  Divides MNIST's and CIFAR-10's 60k/50k/10k exactly.
EVALUATION_CHUNK = 2500


# Trainers released by the jobs of this process (:func:`release_trainer`), by program key, most recent last.
_RELEASED: OrderedDict = OrderedDict()
RELEASED_TRAINERS = 4  # each holds its dataset's variables (tens of MB) and its compiled programs


def stacked_trainer(network, dataset, update, weight_decay, initial, num_workers, sources) -> StackedTrainer:
    """A :class:`StackedTrainer` for these arguments -- one an earlier job of this process released, if its
    compiled programs fit, with this job's data and initial parameters loaded into it.

    Tracing and XLA-compiling a trainer's programs takes 1-3 s; a figure sweep runs hundreds of jobs that
    differ only in seeds and delays, i.e. in values, not in programs.  A program is a function of the
    network's structure (its ``program_key``; a network without one is never shared), the update order,
    the weight decay, the hosted rows, their mixing sources and the data's shapes: the same key, the same
    compiled code, so a job's numbers do not depend on which job of the process ran before it.  A trainer
    in use is never handed out: a job gives it back with :func:`release_trainer` when it is done.
    """
    key = StackedTrainer.program_key(network, dataset, update, weight_decay, num_workers, sources)
    trainer = _RELEASED.pop(key, None) if key is not None else None
    if trainer is None:
        trainer = StackedTrainer(network, dataset, update, weight_decay, initial, num_workers, sources)
        trainer.reuse_key = key
    else:
        trainer.load(dataset, initial)
    return trainer


def release_trainer(trainer: StackedTrainer) -> None:
    """``trainer``'s job is over: a later job of this process with the same programs may take it."""
    key = getattr(trainer, "reuse_key", None)
    if key is None:
        return
    _RELEASED[key] = trainer
    _RELEASED.move_to_end(key)
    while len(_RELEASED) > RELEASED_TRAINERS:
        _RELEASED.popitem(last=False)


class StackedTrainer:
    """TF side: the stacked parameters ``X`` ``[N, P]`` and the compiled step and evaluation."""

    @staticmethod
    def program_key(network, dataset, update, weight_decay, num_workers, sources) -> tuple | None:
        """What this trainer's compiled programs depend on besides values (None: a network that cannot say)."""
        structure = getattr(network, "program_key", None)
        if structure is None:
            return None
        data = (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test)
        shapes = tuple((array.shape, array.dtype.str) for array in data)
        wiring = None if sources is None else (np.asarray(sources).shape, np.asarray(sources, dtype=np.int32).tobytes())
        return (structure, update, float(weight_decay), int(num_workers), wiring, shapes)

    def __init__(
        self,
        network,
        dataset,
        update: str | None,
        weight_decay: float,
        initial: np.ndarray,
        num_workers: int,
        sources: np.ndarray | None,
    ):
        """``update`` (``atc``/``cta``) and ``sources`` are the iteration step's; None for an engine without
        one (the event engine: :meth:`run_events`)."""
        tf = self.tf = import_tensorflow()
        self.network = network
        self.weight_decay = float(weight_decay)
        # [M, S]: where row j's mixing sources are -- rows of Y, then rows received from other processes.
        self.sources = None if sources is None else tf.constant(np.asarray(sources, dtype=np.int32))
        self.hosted = int(num_workers)
        # Variables, not constants: XLA would otherwise embed the whole dataset in the compiled program.
        self.x_train = tf.Variable(dataset.x_train, trainable=False)
        self.y_train = tf.Variable(dataset.y_train.astype(np.int32), trainable=False)
        self.x_test = tf.Variable(dataset.x_test, trainable=False)
        self.y_test = tf.Variable(dataset.y_test.astype(np.int32), trainable=False)
        self.params = tf.constant(np.tile(initial[None, :], (num_workers, 1)))
        self.jit = bool(getattr(network, "jit_compile", True))
        if update is not None:  # None: an event engine, which takes no synchronous steps
            step = self._adapt_then_combine if update == "atc" else self._combine_then_adapt
            # One XLA program for the whole step when the network compiles well; else the step and the
            # mixing as two programs, exactly as the MPI backends run them.
            self._step = compiled(step, jit_compile=True) if self.jit else step
        self._adapt = compiled(self._adapted, jit_compile=self.jit)
        self._mix = compiled(self._mixed, jit_compile=True)
        self._average = compiled(self._average_and_consensus, jit_compile=True)
        self._chunk_sums = compiled(self._sums_over_chunks, jit_compile=self.jit)
        self._count_correct = compiled(self._correct_counts, jit_compile=self.jit)
        self.num_train, self.num_test = len(dataset.y_train), len(dataset.y_test)
        self._prepare_chunks(dataset)

    def _prepare_chunks(self, dataset) -> None:
        """The variables the evaluation programs read: :meth:`_chunk_arrays`."""
        samples, labels, mask = self._chunk_arrays(dataset)
        self.chunk_samples = self.tf.Variable(samples, trainable=False)
        self.chunk_labels = self.tf.Variable(labels, trainable=False)
        self.chunk_mask = self.tf.Variable(mask, trainable=False)

    def _chunk_arrays(self, dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The training then the test samples, their labels and a mask, each padded (mask 0) to a multiple
        of the chunk size."""
        size = self.chunk_size = min(EVALUATION_CHUNK, max(self.num_train, self.num_test))

        def padded(values, fill=0):
            return np.concatenate([values, np.full((-len(values) % size, *values.shape[1:]), fill, values.dtype)])

        samples = np.concatenate([padded(dataset.x_train), padded(dataset.x_test)])
        self.train_chunks = len(padded(dataset.y_train)) // size
        self.num_chunks = len(samples) // size
        labels = np.concatenate([padded(dataset.y_train.astype(np.int32)), padded(dataset.y_test.astype(np.int32))])
        mask = np.concatenate([padded(np.ones(self.num_train, np.float32)), padded(np.ones(self.num_test, np.float32))])
        return samples, labels, mask

    def load(self, dataset, initial: np.ndarray) -> None:
        """Start another job with these programs (:func:`stacked_trainer`): its data into the variables the
        programs read (same shapes), and every hosted row set to its ``initial`` parameters."""
        arrays = (dataset.x_train, dataset.y_train.astype(np.int32), dataset.x_test, dataset.y_test.astype(np.int32))
        variables = (self.x_train, self.y_train, self.x_test, self.y_test)
        variables += (self.chunk_samples, self.chunk_labels, self.chunk_mask)
        for variable, values in zip(variables, arrays + self._chunk_arrays(dataset)):
            variable.assign(values)
        self.params = self.tf.constant(np.tile(initial[None, :], (self.hosted, 1)))

    def _local_loss(self, params, batch):
        """``f_j(x_j; batch_j)`` of one worker: mean cross-entropy (+ weight decay) for ``[P]`` and a minibatch
        (indices ``[B]``, or indices and crop draws ``[B, 3]``)."""
        tf = self.tf
        indices, draws = batch if isinstance(batch, tuple) else (batch, None)
        x = tf.gather(self.x_train, indices)
        if draws is not None:
            x = crop_and_flip(tf, x, draws)
        y = tf.gather(self.y_train, indices)
        logits = self.network.logits(tf, params[None], x[None])[0]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        if self.weight_decay:
            loss += 0.5 * self.weight_decay * tf.reduce_sum(tf.square(params))
        return loss

    def _adapted(self, params, indices, lr):
        """The local steps ``Y = X - eta G(X)`` and the losses ``[M]`` of ``M`` workers' rows.

        One worker at a time (``tf.map_fn``, a loop inside the XLA program), not as one batched
        computation: XLA tiles a batched reduction by the number of rows it spans, so a worker's rounding
        would depend on how many workers share its process.  Looped, every worker runs the same
        fixed-shape program, and ``runner=local`` and ``runner=mpi`` (M = N/R) agree bit for bit -- at
        no cost in speed (``bench/bench_step_layout.py``: 0.74-1.03x the batched program).
        """
        tf = self.tf

        def worker(args):
            row, batch = args
            gradient, loss = self._gradient(row, batch)
            return row - lr * gradient, loss

        return tf.map_fn(worker, (params, indices), fn_output_signature=(tf.float32, tf.float32))

    def _gradient(self, row, indices):
        """``(grad f_j(x_j; batch_j), f_j(x_j; batch_j))`` of one worker's row ``[P]`` and batch ``[B]``."""
        with self.tf.GradientTape() as tape:
            tape.watch(row)
            loss = self._local_loss(row, indices)
        return tape.gradient(loss, row), loss

    def _mixed(self, weights, rows, received=None):
        """``x_j = sum_s w_js y_{sources_js}``, ``s`` ascending: row j of ``W @ Y`` (``mixing.gathered_weights``).

        ``rows`` ``[M, P]`` are the hosted workers' ``Y``; ``received`` ``[Q, P]`` (MPI) the neighbours'
        rows other processes sent, addressed as rows ``M..M+Q-1``.  The slots are unrolled into one XLA
        loop fusion that reads both buffers where they are (no concatenated copy), and every row adds
        the same products in the same order whichever buffer holds them: ``runner=mpi`` mixes its rows
        to the bits ``runner=local`` gets.  A row costs ``(d_j + 1) P`` multiply-adds, not ``N P``.
        """
        tf = self.tf
        hosted = self.hosted

        def source(slot):
            index = self.sources[:, slot]
            if received is None:
                return tf.gather(rows, index)
            from_rows = tf.gather(rows, tf.minimum(index, hosted - 1))
            from_received = tf.gather(received, tf.maximum(index - hosted, 0))
            return tf.where((index < hosted)[:, None], from_rows, from_received)

        mixed = weights[:, :1] * source(0)
        for slot in range(1, self.sources.shape[1]):
            mixed = mixed + weights[:, slot : slot + 1] * source(slot)
        return mixed

    def _adapt_then_combine(self, params, indices, lr, weights):
        """ATC: ``X' = W (X - eta G(X))``."""
        if not self.jit:
            adapted, losses = self._adapt(params, indices, lr)
            return self._mix(weights, adapted, None), losses
        adapted, losses = self._adapted(params, indices, lr)
        return self._mixed(weights, adapted), losses

    def _combine_then_adapt(self, params, indices, lr, weights):
        """CTA: ``X' = W X - eta G(W X)``."""
        if not self.jit:
            return self._adapt(self._mix(weights, params, None), indices, lr)
        return self._adapted(self._mixed(weights, params), indices, lr)

    def step(self, indices, lr, weights) -> np.ndarray:
        """One iteration for every worker; returns the local minibatch losses ``[N]``."""
        self.params, losses = self._step(self.params, indices, lr, weights)
        return losses.numpy()

    def adapt(self, params, indices, lr):
        """``(X - eta G(X), losses)`` for the hosted workers' parameters ``params`` (the MPI backends)."""
        return self._adapt(params, indices, lr)

    def mix(self, weights, rows, received):
        """The hosted rows of ``W @ Y`` (:meth:`_mixed`) from the hosted ``rows`` and the ``received`` ones:
        what the local step ends (ATC) or starts (CTA) with, the same sums, compiled alone."""
        return self._mix(weights, rows, received)

    # Kinds of the events :meth:`run_events` applies.
    AVERAGE, STEP = 0, 1

    def _events(self, params, gradients, kinds, workers, partners, lrs, batches, count):
        """Apply events ``0..count-1`` in order to the rows ``X`` (``params``) and the gradients in flight
        ``G`` (``gradients``), both ``[N, P]``; returns ``(X, G, losses [E])``.  Event e of worker
        ``i = workers[e]``:

        - ``AVERAGE``: ``x_i, x_j <- (x_i + x_j) / 2`` with ``j = partners[e]``;
        - ``STEP``: ``x_i <- x_i - lrs[e] g_i``, then ``g_i <- grad f_i(x_i; batches[e])`` (the gradient of
          the step that starts now) and ``losses[e] = f_i(x_i; batches[e])``.

        One event at a time, in a loop inside one XLA program: a gradient is :meth:`_gradient`, the
        same computation whichever events precede it and however many share the program (the arrays
        have a fixed capacity ``E``; ``count`` of them are used), so the bits never depend on how the
        events are split into calls.  Each branch returns only the rows it changes.
        """
        tf = self.tf
        # tf.gather, never ``tensor[index]``: XLA's strided slice wants constant bounds, which would make
        # the compiled program depend on the values of ``workers`` (recompiled for every chunk).
        take = tf.gather

        def body(e, rows, pending, losses):
            i, j = take(workers, e), take(partners, e)

            def average():
                mean = (take(rows, i) + take(rows, j)) * 0.5  # exactly (x_i + x_j) / 2: halving is exact
                return mean, j, mean, take(pending, i), tf.constant(0.0)

            def step():
                row = take(rows, i) - take(lrs, e) * take(pending, i)
                gradient, loss = self._gradient(row, take(batches, e))
                return row, i, row, gradient, loss

            row_i, other, row_other, gradient_i, loss = tf.cond(take(kinds, e) == self.AVERAGE, average, step)
            rows = tf.tensor_scatter_nd_update(rows, [[i]], row_i[None])
            rows = tf.tensor_scatter_nd_update(rows, [[other]], row_other[None])
            pending = tf.tensor_scatter_nd_update(pending, [[i]], gradient_i[None])
            losses = tf.tensor_scatter_nd_update(losses, [[e]], loss[None])
            return e + 1, rows, pending, losses

        start = (tf.constant(0), params, gradients, tf.zeros(tf.shape(kinds), tf.float32))
        _, params, gradients, losses = tf.while_loop(lambda e, *_: e < count, body, start)
        return params, gradients, losses

    def run_events(self, gradients, kinds, workers, partners, lrs, batches, count: int):
        """Apply ``count`` events (:meth:`_events`) to :attr:`params` and ``gradients`` (``[N, P]``, the
        gradients in flight); returns the new gradients and the events' losses ``[count]``."""
        if not hasattr(self, "_run_events"):
            self._run_events = compiled(self._events, jit_compile=self.jit)
        tf = self.tf
        self.params, gradients, losses = self._run_events(
            self.params,
            gradients,
            tf.constant(kinds),
            tf.constant(workers),
            tf.constant(partners),
            tf.constant(lrs),
            tf.constant(batches),
            tf.constant(count, dtype=tf.int32),
        )
        return gradients, losses.numpy()[:count]

    def _average_and_consensus(self, params):
        """``xbar = mean_j x_j``, the consensus distance ``mean_j ||x_j - xbar||^2``, and whether X is finite."""
        tf = self.tf
        average = tf.reduce_mean(params, axis=0)
        consensus = tf.reduce_mean(tf.reduce_sum(tf.square(params - average[None]), axis=1))
        return average, consensus, tf.reduce_all(tf.math.is_finite(params))

    def _sums_over_chunks(self, average, selected):
        """Per chunk ``c`` with ``selected[c]`` (``[num_chunks]`` bool): the summed cross-entropy of the average
        model on its samples and how many of them it classifies right (zeros for the others).  One chunk at
        a time (``tf.map_fn``), as the step loops over workers: a chunk's sums have the same bits whichever
        process, and with whichever other chunks, computes them.  The mask keeps the program's shapes fixed,
        so the full evaluation, the test-set-only one and every rank's share are one compiled program."""
        tf = self.tf

        def chunk_sums(chunk):
            logits, y, mask = self._chunk_logits(average, chunk)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), y), tf.float32)
            return tf.reduce_sum(losses * mask), tf.reduce_sum(hits * mask)

        def one(args):
            chunk, take = args
            return tf.cond(take, lambda: chunk_sums(chunk), lambda: (tf.constant(0.0), tf.constant(0.0)))

        chunks = tf.range(self.num_chunks)
        return tf.map_fn(one, (chunks, selected), fn_output_signature=(tf.float32, tf.float32))

    def _chunk_logits(self, row, chunk):
        """Logits ``[size, classes]`` of the model ``row`` ``[P]`` on chunk ``chunk``, its labels and mask."""
        tf = self.tf
        size, shape = self.chunk_size, self.chunk_samples.shape[1:]
        start = chunk * size
        x = tf.slice(self.chunk_samples, tf.stack([start] + [0] * len(shape)), [size, *shape])
        y = tf.slice(self.chunk_labels, tf.reshape(start, [1]), [size])
        mask = tf.slice(self.chunk_mask, tf.reshape(start, [1]), [size])
        return self.network.logits(tf, row[None], x[None])[0], y, mask

    def average_model(self, params) -> tuple[np.ndarray, float, bool]:
        """``(xbar [P], consensus distance, finite)`` of the parameters ``[N, P]``."""
        average, consensus, finite = self._average(params)
        return average.numpy(), float(consensus), bool(finite)

    def evaluation_chunks(self, train: bool) -> np.ndarray:
        """The chunks an evaluation sums: the test set's, preceded by the training set's if ``train``."""
        return np.arange(0 if train else self.train_chunks, self.num_chunks)

    def chunk_sums(self, average: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """``[len(chunks), 2]`` float64: (loss sum, right predictions) of the average model per chunk."""
        if len(chunks) == 0:
            return np.zeros((0, 2))
        selected = np.zeros(self.num_chunks, dtype=bool)
        selected[chunks] = True
        losses, hits = self._chunk_sums(self.tf.constant(average), self.tf.constant(selected))
        return np.stack([losses.numpy(), hits.numpy()], axis=1).astype(np.float64)[chunks]

    def metrics_from_chunks(self, sums: np.ndarray, train: bool = True) -> dict:
        """Losses and accuracy of the average model from the chunks' sums ``[num_chunks, 2]`` (row = chunk),
        added in chunk order (float64): the same numbers for any split of the chunks between processes, and
        for a test-set-only evaluation (``train=False``: no ``train_loss``) as for a full one."""
        test = sums[self.train_chunks :]
        metrics = {
            "test_loss": float(test[:, 0].sum() / self.num_test),
            "test_accuracy": float(test[:, 1].sum() / self.num_test),
        }
        if train:
            metrics["train_loss"] = float(sums[: self.train_chunks, 0].sum() / self.num_train)
        return metrics

    def _correct_counts(self, params):
        """Test samples each row's own model classifies right, ``[M]`` int32 -- exact counts, one worker at a
        time as in the step, so each process can count its own workers and the sum is the same bits.  Each
        worker goes through the test chunks one at a time, so a convolutional network's activations are
        those of one chunk, not of the whole test set."""
        tf = self.tf
        test_chunks = tf.range(self.train_chunks, self.num_chunks)

        def worker(row):
            def chunk_hits(chunk):
                logits, y, mask = self._chunk_logits(row, chunk)
                hits = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), y)
                return tf.reduce_sum(tf.cast(hits, tf.int32) * tf.cast(mask, tf.int32))

            return tf.reduce_sum(tf.map_fn(chunk_hits, test_chunks, fn_output_signature=tf.int32))

        return tf.map_fn(worker, params, fn_output_signature=tf.int32)

    def correct_counts(self, params=None) -> np.ndarray:
        """Correct test predictions of the local models of ``params`` (default: the hosted workers)."""
        return self._count_correct(self.params if params is None else params).numpy()
