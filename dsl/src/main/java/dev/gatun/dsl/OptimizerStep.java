package dev.gatun.dsl;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.ReduceOp;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The nodes of one {@link Optimizer#step}: the backward pass ({@link GraphBuilder#grad}), the data-parallel average,
 * the global-norm clipping and each parameter's update, written over the states in place. Every state the step
 * rewrites (a parameter, a moment, the step count) is read through {@code snapshot}'s copy and written by an
 * {@code update_slice} of its whole extent at position 0 over {@code snapshot}'s in-place output, so the graph's rule
 * that an overwritten state version has no other reader holds and no schedule can read a half-updated state. (The
 * planner then writes each new value straight into its state's slot where the update's kernel reads the old value
 * last, dropping the copy and the update: {@code dev.gatun.planner.StateWrites}.)
 *
 * <p>The update's arithmetic is PyTorch's, op for op, in the master dtype; the step count is a state
 * {@value #STEP} of shape [1] (f64 when a master is f64, else f32, as {@code torch.optim} keeps {@code state['step']}),
 * the moments states named {@code <param>.exp_avg}, {@code <param>.exp_avg_sq} and {@code <param>.momentum_buffer}.
 */
final class OptimizerStep {
    /** The state holding how many steps have run. */
    static final String STEP = "optimizer.step";

    private final GraphBuilder g;
    private final Tensor zero;
    private final Map<String, Tensor> written = new LinkedHashMap<>();
    /** With a loss scale: true where this step's gradients hold an inf or a NaN, and every update keeps the old value. */
    private Tensor skip;

    private OptimizerStep(GraphBuilder g) {
        this.g = g;
        this.zero = g.constant(DType.I64, new long[]{1}, 0);
    }

    /** A state read through a snapshot's copy, with the version its new value is written over. */
    private record Rewritten(String name, Tensor version, Tensor value) {}

    /** A loss scale's states, the scale in use (f32 [1]: {@code initScale} where the state is still 0) and the scaled loss. */
    private record Scaled(LossScale settings, Rewritten scale, Rewritten tracker, Tensor current, Tensor loss) {}

    static TrainStep add(Optimizer opt, Tensor loss, Parameters params) {
        if (loss == null || params == null) throw new GraphException("Optimizer.step: the loss and the parameters are required");
        if (loss.graph() != params.graph())
            throw new GraphException("Optimizer.step: the loss " + loss.describe() + " and the parameters belong to different graphs");
        List<Parameters.Parameter> ps = params.list();
        if (ps.isEmpty()) throw new GraphException("Optimizer.step: no parameters; declare them with Parameters.parameter before the forward pass");
        return new OptimizerStep(loss.graph()).step(opt, loss, ps);
    }

    private TrainStep step(Optimizer opt, Tensor loss, List<Parameters.Parameter> ps) {
        String group = opt.gradGroup();
        double maxNorm = opt.maxGradNorm();
        Scaled scaled = opt.lossScale() == null ? null : scaled(opt.lossScale(), loss);
        // an FSDP parameter's gradient is taken of the gathered tensor the forward pass read, then reduce-scattered
        Tensor[] grads = g.grad(scaled == null ? loss : scaled.loss(), ps.stream().map(p -> p.fsdpGroup() == null ? p.master() : p.compute()).toArray(Tensor[]::new));
        for (int i = 0; i < grads.length; i++) grads[i] = reduce(ps.get(i), grads[i], group);
        if (scaled != null) skip = unscale(grads, ps, scaled);
        DType countType = ps.stream().anyMatch(p -> p.master().dtype() == DType.F64) ? DType.F64 : DType.F32;
        Tensor norm = maxNorm > 0 ? clip(grads, ps, maxNorm, countType) : null;
        Rewritten count = rewritten(STEP, g.state(STEP, countType, 1L));
        Tensor t = count.value(), t1 = t.add(1);
        write(count, t1);
        var gradients = new LinkedHashMap<String, Tensor>();
        var updated = new LinkedHashMap<String, Tensor>();
        for (int i = 0; i < ps.size(); i++) {
            var p = ps.get(i);
            gradients.put(p.name(), grads[i]);
            Tensor next = switch (opt) {
                case Optimizer.AdamW a -> adamW(a, p, grads[i], t1);
                case Optimizer.Sgd s -> sgd(s, p, grads[i], t);
            };
            updated.put(p.name(), write(new Rewritten(p.name(), p.version(), p.master()), next));
        }
        if (scaled != null) updateScale(scaled);
        return new TrainStep(gradients, norm, updated, written);
    }

    /** The loss scale's states read, the scale in use, and the loss times it (in the loss's dtype, as GradScaler.scale). */
    private Scaled scaled(LossScale ls, Tensor loss) {
        Rewritten scale = rewritten(LossScale.SCALE, g.state(LossScale.SCALE, DType.F32, 1L));
        Rewritten tracker = rewritten(LossScale.TRACKER, g.state(LossScale.TRACKER, DType.I32, 1L));
        Tensor current = scale.value().eq(0).where(g.scalar(ls.initScale(), DType.F32), scale.value());
        return new Scaled(ls, scale, tracker, current, loss.mul(current.cast(loss.dtype())));
    }

    /**
     * GradScaler.unscale_: whether any gradient holds an inf or a NaN, checked before unscaling ({@code g * 0} summed
     * is 0 for finite gradients, NaN otherwise; a gradient whose ranks hold different parts has its check summed over
     * those groups, so every rank skips together), then each gradient times {@code 1 / scale} (float64, rounded to
     * float32). Returns the skip flag.
     */
    private Tensor unscale(Tensor[] grads, List<Parameters.Parameter> ps, Scaled scaled) {
        var perGroups = new LinkedHashMap<List<String>, Tensor>();
        for (int i = 0; i < grads.length; i++)
            perGroups.merge(ps.get(i).partGroups(), grads[i].mul(0.0).sum().cast(DType.F32), Tensor::add);
        Tensor total = null;
        for (var e : perGroups.entrySet()) {
            Tensor summed = e.getValue();
            for (String grp : e.getKey()) summed = summed.allReduce(ReduceOp.SUM, grp);
            total = total == null ? summed : total.add(summed);
        }
        Tensor inv = g.scalar(1, DType.F64).div(scaled.current().cast(DType.F64)).cast(DType.F32);
        for (int i = 0; i < grads.length; i++) grads[i] = grads[i].mul(inv.cast(grads[i].dtype()));
        return total.ne(total);
    }

    /**
     * GradScaler.update ({@code _amp_update_scale_}): after a skipped step the scale times {@code backoffFactor} and the
     * tracker 0; else the tracker plus one, and where that reaches {@code growthInterval} the scale times
     * {@code growthFactor} (kept where that is not finite) and the tracker 0. Written whether or not the step was skipped.
     */
    private void updateScale(Scaled s) {
        Tensor found = skip, scale = s.current(), successful = s.tracker().value().add(1);
        Tensor zero = g.scalar(0, DType.I32);
        Tensor grow = successful.eq(s.settings().growthInterval());
        Tensor grown = scale.mul(s.settings().growthFactor());
        Tensor kept = grown.sub(grown).eq(0).where(grown, scale);
        skip = null;
        write(s.scale(), found.where(scale.mul(s.settings().backoffFactor()), grow.where(kept, scale)));
        write(s.tracker(), found.where(zero, grow.where(zero, successful)));
    }

    /**
     * A gradient as the update uses it, a tied parameter's first summed over its copies ({@code all_reduce(sum)}): a
     * replicated parameter's {@code all_reduce(avg)}-ed over the data-parallel {@code group} (as it is without one); an FSDP parameter's (of the whole, gathered tensor) {@code reduce_scatter}-ed
     * over its group to this rank's shard, with avg where that is the data-parallel group (PyTorch FSDP's averaged
     * gradient) and sum without one (the gradient of the ranks' losses' sum, as all_gather's rule gives), then cast to
     * the master dtype.
     */
    private static Tensor reduce(Parameters.Parameter p, Tensor grad, String group) {
        if (p.tiedGroup() != null) grad = grad.allReduce(ReduceOp.SUM, p.tiedGroup());
        if (p.fsdpGroup() == null) return group == null ? grad : grad.allReduce(ReduceOp.AVG, group);
        if (group != null && !group.equals(p.fsdpGroup()))
            throw new GraphException("Optimizer.step: parameter '" + p.name() + "' is fully sharded over '" + p.fsdpGroup() + "' but the gradients are averaged over '"
                    + group + "'; average them over the group the parameters are sharded over (averageGradients(\"" + p.fsdpGroup() + "\"))");
        return grad.reduceScatter(group == null ? ReduceOp.SUM : ReduceOp.AVG, p.fsdpGroup()).cast(p.master().dtype());
    }

    /**
     * {@code clip_grad_norm_}: the 2-norm of all gradients together (the squares of a parameter whose ranks hold
     * different parts, tensor-parallel or FSDP, summed over those groups too), each gradient scaled by
     * {@code min(max / (norm + 1e-6), 1)}; returns the norm.
     */
    private Tensor clip(Tensor[] grads, List<Parameters.Parameter> ps, double maxNorm, DType dt) {
        var perGroups = new LinkedHashMap<List<String>, Tensor>();
        perGroups.put(List.of(), null);   // the replicated parameters' squares first, as before sharding
        for (int i = 0; i < grads.length; i++)
            perGroups.merge(ps.get(i).partGroups(), grads[i].mul(grads[i]).sum().cast(dt), Tensor::add);
        Tensor total = null;
        for (var e : perGroups.entrySet()) {
            Tensor summed = e.getValue();
            if (summed == null) continue;
            for (String group : e.getKey()) summed = summed.allReduce(ReduceOp.SUM, group);
            total = total == null ? summed : total.add(summed);
        }
        Tensor norm = total.sqrt();
        Tensor coef = g.scalar(maxNorm, dt).div(norm.add(1e-6)).minimum(1.0);
        for (int i = 0; i < grads.length; i++) grads[i] = grads[i].mul(coef.cast(grads[i].dtype()));
        return norm;
    }

    private Tensor adamW(Optimizer.AdamW a, Parameters.Parameter p, Tensor grad, Tensor t1) {
        DType dt = p.master().dtype();
        Rewritten m = moment(p, "exp_avg"), v = moment(p, "exp_avg_sq");
        Tensor decayed = a.weightDecay() == 0 ? p.master() : p.master().mul(1 - a.lr() * a.weightDecay());
        Tensor m1 = m.value().add(grad.sub(m.value()).mul(1 - a.beta1()));
        Tensor v1 = v.value().mul(a.beta2()).add(grad.mul(grad).mul(1 - a.beta2()));
        write(m, m1);
        write(v, v1);
        Tensor bc1 = g.scalar(1, t1.dtype()).sub(g.scalar(a.beta1(), t1.dtype()).pow(t1));
        Tensor bc2 = g.scalar(1, t1.dtype()).sub(g.scalar(a.beta2(), t1.dtype()).pow(t1));
        Tensor stepSize = g.scalar(a.lr(), t1.dtype()).div(bc1).cast(dt);
        Tensor denom = v1.sqrt().div(bc2.sqrt().cast(dt)).add(a.eps());
        return decayed.sub(stepSize.mul(m1.div(denom)));
    }

    private Tensor sgd(Optimizer.Sgd s, Parameters.Parameter p, Tensor grad, Tensor t) {
        Tensor d = s.weightDecay() == 0 ? grad : grad.add(p.master().mul(s.weightDecay()));
        if (s.momentum() != 0) {
            Rewritten b = moment(p, "momentum_buffer");
            // torch.optim.SGD: the buffer is a clone of d at the first step, then momentum * b + (1 - dampening) * d
            Tensor later = b.value().mul(s.momentum()).add(d.mul(1 - s.dampening()));
            Tensor b1 = t.eq(0).where(d, later);
            write(b, b1);
            d = s.nesterov() ? d.add(b1.mul(s.momentum())) : b1;
        }
        return p.master().sub(d.mul(s.lr()));
    }

    /** A moment of {@code p}: a state {@code <p>.<kind>} of p's shape and master dtype, zeros at first. */
    private Rewritten moment(Parameters.Parameter p, String kind) {
        Object[] dims = java.util.Arrays.stream(p.master().shape().sizes()).boxed().toArray();
        return rewritten(p.name() + "." + kind, g.state(p.name() + "." + kind, p.master().dtype(), dims));
    }

    private Rewritten rewritten(String name, Tensor state) {
        List<Tensor> snap = g.apply("snapshot", Map.of(), state);
        return new Rewritten(name, snap.get(0), snap.get(1));
    }

    /**
     * {@code value} written over the whole of {@code r}'s state in place (with a loss scale, the old value kept where the
     * step is skipped); returns the written version.
     */
    private Tensor write(Rewritten r, Tensor value) {
        Tensor v = value.cast(r.version().dtype());
        if (skip != null) v = skip.where(r.value(), v);
        Tensor out = r.version().updateSlice(0, v, zero);
        written.put(r.name(), out);
        return out;
    }
}
